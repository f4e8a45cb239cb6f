"""Hostile input (issue 17): each finding of the adversarial pass, reproduced through the CLI.

Every case here failed before its fix: a traceback, a wrong exit code, a silent wrong answer or
a hang. docs/hostile-input.md is the table of what is refused and how.
"""

from __future__ import annotations

import os
import re
import textwrap
import time
from pathlib import Path

import pytest

from orchestrator.cli.main import main, write_crash_file
from orchestrator.cli.output import harmless
from orchestrator.errors import ExitCode, InventoryError
from orchestrator.inventory import load_inventory

GOOD = """
all:
  vars: {fabric_iface: eth1}
  hosts:
    a: {rank: 0, ansible_host: 10.0.0.1}
    b: {rank: 1, ansible_host: 10.0.0.2}
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- 1. Rich markup in user text ------------------------------------------------------------


@pytest.mark.parametrize("name", ["[/].yaml", "backup[old]/inv.yaml", "[bold]x[/bold].yaml"])
def test_brackets_in_an_inventory_path_are_printed_as_given_never_as_markup(
    tmp_path, capsys, monkeypatch, name
):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "inventory", "show", "-i", name)
    assert code == ExitCode.CONFIG
    assert f"error: {name}: no such file" in err
    assert "Traceback" not in err and "internal error" not in err


def test_brackets_in_a_recipe_name_are_printed_as_given(capsys):
    code, _, err = run(capsys, "recipes", "show", "x[/]y")
    assert code == ExitCode.CONFIG
    assert "x[/]y" in err and "internal error" not in err


def test_a_host_name_with_brackets_and_escapes_is_shown_literally_in_the_table(tmp_path, capsys):
    inv = write(
        tmp_path / "inv.yaml",
        """
        all:
          vars: {fabric_iface: "eth[red]1\\e]0;pwned\\a"}
          hosts:
            a: {rank: 0}
        """,
    )
    code, out, _ = run(capsys, "inventory", "show", "-i", str(inv))
    assert code == 0
    assert "\x1b" not in out and "\a" not in out
    assert "eth[red]1\\x1b]0;pwned\\x07" in out


def test_harmless_escapes_every_control_character_but_tab():
    assert harmless("a\tb\x1b[31mc\x9b\r\n\x07") == "a\tb\\x1b[31mc\\x9b\\x0d\\x0a\\x07"


# -- 2. Ansible semantics (the property test against ansible-inventory is tests/ansible) -----


def test_group_vars_and_host_vars_next_to_the_inventory_are_read(tmp_path):
    inv = write(
        tmp_path / "inv.yaml",
        """
        all:
          children:
            sparks:
              hosts:
                s0: {rank: 0}
                s1: {}
        """,
    )
    write(tmp_path / "group_vars" / "all.yml", "fabric_iface: from_all\nansible_user: nvidia\n")
    write(tmp_path / "group_vars" / "sparks" / "10-net.yaml", "fabric_iface: from_sparks\n")
    write(tmp_path / "group_vars" / "sparks" / "20-more.yml", "mgmt_iface: enP7s7\n")
    write(tmp_path / "group_vars" / "sparks" / "notes.txt", "fabric_iface: ignored\n")
    write(tmp_path / "host_vars" / "s1", "rank: 1\nansible_host: 10.0.0.9\n")
    loaded = load_inventory(inv)
    s0, s1 = loaded.nodes
    assert (s0.fabric_iface, s0.mgmt_iface, s0.user) == ("from_sparks", "enP7s7", "nvidia")
    assert (s1.rank, s1.address) == (1, "10.0.0.9")
    before = loaded.sha256
    write(tmp_path / "host_vars" / "s1", "rank: 1\nansible_host: 10.0.0.10\n")
    assert load_inventory(inv).sha256 != before  # the identity covers the vars files


def test_a_host_range_expands_as_in_ansible(tmp_path):
    inv = write(
        tmp_path / "inv.yaml",
        """
        all:
          vars: {fabric_iface: eth1}
          hosts:
            node[0:1]: {}
          children:
            more:
              hosts:
                node0: {rank: 0}
                node1: {rank: 1}
                x[a:b]-[01:02]: {rank: 9}
        """,
    )
    with pytest.raises(InventoryError) as info:
        load_inventory(inv)
    text = "\n".join(info.value.lines())
    # four hosts from the second pattern, each claiming rank 9: the pattern expanded
    for host in ("xa-01", "xa-02", "xb-01", "xb-02"):
        assert f"host '{host}'" in text


def test_a_host_port_in_the_pattern_sets_ansible_port(tmp_path):
    inv = write(
        tmp_path / "inv.yaml",
        "all:\n  vars: {fabric_iface: e}\n  hosts:\n    n[0:1]:2222: {}\n    n0: {rank: 0}\n"
        "    n1: {rank: 1, ansible_host: other}\n",
    )
    assert [n.port for n in load_inventory(inv).nodes] == [2222, 2222]


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "all:\n  children:\n    a:\n      children:\n        b:\n          children:\n"
            "            a: {}\n",
            "recursive dependency loop",
        ),
        ("all:\n  hosts:\n    'n[1:]': {}\n", "host range must specify end value"),
        ("all:\n  hosts:\n    'n[0:99999999]': {}\n", "more than 100,000 hosts"),
        ("all:\n  hosts:\n    'n[x]': {}\n", "host range must be begin:end"),
        ("all:\n  hosts:\n    1: {}\n", "must be a string"),
    ],
)
def test_group_loops_and_bad_ranges_are_refused_with_a_line(tmp_path, text, expected):
    inv = write(tmp_path / "inv.yaml", text)
    with pytest.raises(InventoryError) as info:
        load_inventory(inv)
    assert expected in "\n".join(info.value.lines())


@pytest.mark.parametrize(
    "content, expected",
    [
        ("[sparks]\nspark-0 ansible_host=10.0.0.1 rank=0\n", "an INI inventory"),
        ("spark-0 ansible_host=10.0.0.1\n", "an INI inventory"),
        ("#!/bin/sh\necho '{}'\n", "an inventory script"),
        ("$ANSIBLE_VAULT;1.1;AES256\n6162\n", "vault-encrypted"),
        ("plugin: aws_ec2\n", "an inventory plugin's configuration"),
        ("\0\1\2binary", "a binary file"),
    ],
)
def test_what_ansible_would_read_but_cluster_does_not_is_refused_by_name(
    tmp_path, capsys, content, expected
):
    path = tmp_path / "hosts"
    path.write_text(content)
    code, _, err = run(capsys, "inventory", "show", "-i", str(path))
    assert code == ExitCode.CONFIG
    assert expected in err and "Traceback" not in err


def test_a_jinja_template_in_a_connection_variable_is_refused(tmp_path):
    inv = write(
        tmp_path / "inv.yaml",
        "all:\n  vars: {fabric_iface: e}\n  hosts:\n"
        "    a: {rank: 0, ansible_host: '{{ inventory_hostname }}.lan'}\n",
    )
    with pytest.raises(InventoryError, match="a Jinja template"):
        load_inventory(inv)


# -- 3. YAML alias bomb ---------------------------------------------------------------------

BOMB = "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{','.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)
)


def test_a_billion_laughs_inventory_is_refused_quickly_with_a_short_line(tmp_path, capsys):
    path = tmp_path / "bomb.yaml"
    path.write_text('a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + BOMB)
    assert path.stat().st_size < 600
    started = time.monotonic()
    code, _, err = run(capsys, "inventory", "show", "-i", str(path))
    assert code == ExitCode.CONFIG
    assert "aliases" in err and "billion laughs" in err
    assert len(err) < 1000
    assert time.monotonic() - started < 30  # generous: before the fix, 13.5 s and 475 MB


@pytest.mark.parametrize(
    "text, expected",
    [
        ("a: &a [*a]\n", "recursive alias"),
        # libyaml's parser stops at its own limit first (1,000 levels), PyYAML's at ours
        ("[" * 5000 + "]" * 5000 + "\n", "nested deeper than 64 levels|maximum nesting depth"),
        ("x: " + "{a: " * 100 + "1" + "}" * 100 + "\n", "nested deeper than 64 levels"),
    ],
)
def test_recursive_and_deep_documents_are_refused(tmp_path, capsys, text, expected):
    path = tmp_path / "inv.yaml"
    path.write_text(text)
    code, _, err = run(capsys, "inventory", "show", "-i", str(path))
    assert code == ExitCode.CONFIG and re.search(expected, err)


def test_an_oversized_inventory_is_refused_before_it_is_read(tmp_path, capsys):
    path = tmp_path / "inv.yaml"
    with path.open("wb") as fh:
        fh.truncate(17 * 2**20)
    code, _, err = run(capsys, "inventory", "show", "-i", str(path))
    assert code == ExitCode.CONFIG and "more than 16 MiB" in err


def test_an_error_line_never_carries_the_whole_input(tmp_path, capsys):
    path = write(
        tmp_path / "inv.yaml",
        "all:\n  hosts:\n    a: {rank: '" + "9" * 100_000 + "', fabric_iface: e}\n",
    )
    code, _, err = run(capsys, "inventory", "show", "-i", str(path))
    assert code == ExitCode.CONFIG
    assert "key 'rank'" in err and len(err) < 1000


# -- Also: inventory files that are not files -------------------------------------------------


def test_a_directory_as_the_inventory_is_a_config_error(tmp_path, capsys):
    code, _, err = run(capsys, "inventory", "show", "-i", str(tmp_path))
    assert code == ExitCode.CONFIG and "a directory" in err and "Traceback" not in err


def test_a_symlink_loop_is_named_as_one(tmp_path, capsys):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    code, _, err = run(capsys, "inventory", "show", "-i", str(tmp_path / "a"))
    assert code == ExitCode.CONFIG and "symbolic link loop" in err


def test_a_dangling_symlink_names_its_target(tmp_path, capsys):
    (tmp_path / "a").symlink_to(tmp_path / "gone.yaml")
    code, _, err = run(capsys, "inventory", "show", "-i", str(tmp_path / "a"))
    assert code == ExitCode.CONFIG and "gone.yaml, which does not exist" in err


@pytest.mark.parametrize("port", ["true", "2.5", "0", "65536", "'22x'"])
def test_ansible_port_must_be_a_real_port(tmp_path, port):
    inv = write(
        tmp_path / "inv.yaml",
        f"all:\n  hosts:\n    a: {{rank: 0, fabric_iface: e, ansible_port: {port}}}\n",
    )
    with pytest.raises(InventoryError, match="key 'ansible_port': expected a TCP port"):
        load_inventory(inv)


def test_a_string_port_of_digits_is_a_port_as_in_ansible(tmp_path):
    inv = write(
        tmp_path / "inv.yaml",
        "all:\n  hosts:\n    a: {rank: 0, fabric_iface: e, ansible_port: '2200'}\n",
    )
    assert load_inventory(inv).nodes[0].port == 2200


def test_every_missing_rank_is_named(tmp_path):
    inv = write(
        tmp_path / "inv.yaml",
        "all:\n  vars: {fabric_iface: e}\n  hosts:\n    a: {rank: 0}\n    b: {rank: 3}\n"
        "    c: {rank: 3}\n    d: {rank: 2}\n",
    )
    with pytest.raises(InventoryError) as info:
        load_inventory(inv)
    assert "rank 1 missing (ranks are 0..3, one per host)" in "\n".join(info.value.lines())


# -- crash files ----------------------------------------------------------------------------


def test_two_crashes_in_the_same_instant_keep_both_tracebacks(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    paths = {write_crash_file(RuntimeError(f"crash {k}")) for k in range(5)}
    assert len(paths) == 5
    texts = {Path(p).read_text() for p in paths}
    assert all(any(f"crash {k}" in t for t in texts) for k in range(5))
    assert all(os.stat(p).st_mode & 0o077 == 0 for p in paths)


def test_good_inventory_still_loads(tmp_path):
    assert [n.name for n in load_inventory(write(tmp_path / "inv.yaml", GOOD)).nodes] == [
        "a",
        "b",
    ]


def test_a_verdict_quoting_a_log_line_with_brackets_and_escapes_prints_as_it_is(tmp_path, capsys):
    from orchestrator.cli.boot_screen import print_outcome
    from orchestrator.models.run import Finding, Outcome
    from orchestrator.run.boot import BootResult
    from orchestrator.runstore import RunStore

    line = "rank 3 exited: [/] [bold]RuntimeError[/bold] \x1b]0;owned\x07"
    verdict = Finding(
        watcher="exits",
        severity="verdict",
        rank=3,
        message=line,
        advice="see [rank 3]",
        outcome=Outcome.RANK_EXITED,
    )
    print_outcome(BootResult(run=RunStore(tmp_path).create(), verdict=verdict))
    out = capsys.readouterr().out
    assert "rank 3 exited: [/] [bold]RuntimeError[/bold] \\x1b]0;owned\\x07" in out
    assert "see [rank 3]" in out and "\x1b]0" not in out

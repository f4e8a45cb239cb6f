"""ansible/ without a cluster: syntax checks, the NFS role in --check against a local inventory,
and the house rules every play follows (issue 10). Real ansible-playbook; no root, no testbed.

The NFS role is proven only here (syntax and --check): the project VM's kernel has no NFS
client, so nothing can really be mounted (ansible/README.md says so).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.inventory import _suggest, load_inventory
from orchestrator.models.inventory import HOST_VAR_NAMES

pytestmark = pytest.mark.ansible
REPO = Path(__file__).resolve().parents[2]
ANSIBLE_DIR = REPO / "ansible"
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
RECAP = re.compile(
    r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M
)
# Modules whose tasks only read (or only talk); everything else may write.
READ_ONLY = {"raw", "command", "shell", "slurp", "stat", "set_fact", "debug", "assert", "fail"}


def playbook(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    if not ANSIBLE_PLAYBOOK.exists():
        pytest.fail(f"ansible-playbook not installed at {ANSIBLE_PLAYBOOK} (dev dependency)")
    env = {**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE_DIR / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    proc = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=180,
        check=False,
    )
    if check and proc.returncode != 0:
        pytest.fail(
            f"ansible-playbook {' '.join(args)}: rc {proc.returncode}\n{proc.stdout}{proc.stderr}"
        )
    return proc


@pytest.mark.parametrize("name", ["prepare.yml", "check.yml"])
@pytest.mark.parametrize("inventory", ["spark-8x.example.yaml", "sim-8x.yaml"])
def test_syntax_check(name: str, inventory: str) -> None:
    out = playbook(
        "-i", str(REPO / "inventory" / inventory), "--syntax-check", str(ANSIBLE_DIR / name)
    )
    assert f"playbook: {ANSIBLE_DIR / name}" in out.stdout


def test_nfs_role_in_check_mode_against_a_local_inventory(tmp_path: Path) -> None:
    """What a real run would do to fstab and the mount point, shown (--check --diff), done never."""
    fstab = tmp_path / "fstab"
    fstab.write_text("# <file system> <mount point> <type> <options> <dump> <pass>\n")
    mount_point = tmp_path / "models"
    inventory = tmp_path / "local.yaml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        "nfs-client": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": sys.executable,
                            "rank": 0,
                            "fabric_iface": "lo",
                            "spark_nfs_enabled": True,
                            "spark_nfs_server": "192.0.2.1",
                            "spark_nfs_export": "/export/models",
                            "spark_nfs_mount_point": str(mount_point),
                            "spark_nfs_fstab": str(fstab),
                            "spark_nfs_install_client": False,
                        }
                    }
                }
            }
        )
    )
    # The inventory is one `cluster` accepts too (spark_* variables pass through).
    assert [n.name for n in load_inventory(inventory).nodes] == ["nfs-client"]
    out = playbook(
        "-i", str(inventory), "--check", "--diff", "--tags", "nfs", str(ANSIBLE_DIR / "prepare.yml")
    )
    text = out.stdout
    recap = {m.group(1): int(m.group(3)) for m in RECAP.finditer(text)}
    assert recap["nfs-client"] >= 2, text  # mount point and fstab line would change
    line = f"192.0.2.1:/export/models {mount_point} nfs ro,hard,noatime,nconnect=8,_netdev 0 0"
    assert f"+{line}" in text, text
    assert "TASK [nfs_models : Mount the model directory]" in text
    # nothing was done: check mode
    assert fstab.read_text() == "# <file system> <mount point> <type> <options> <dump> <pass>\n"
    assert not mount_point.exists()
    # and no other role ran (tags), in particular nothing touched Docker, logind or ~/.ssh
    assert "docker_daemon :" not in text and "ssh_mesh :" not in text and "logind :" not in text


def test_nfs_role_refuses_missing_settings(tmp_path: Path) -> None:
    inventory = tmp_path / "local.yaml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        "nfs-client": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": sys.executable,
                            "spark_nfs_enabled": True,
                        }
                    }
                }
            }
        )
    )
    out = playbook(
        "-i",
        str(inventory),
        "--check",
        "--tags",
        "nfs",
        str(ANSIBLE_DIR / "prepare.yml"),
        check=False,
    )
    assert out.returncode == 2
    assert "spark_nfs_enabled is true on nfs-client but spark_nfs_server" in out.stdout


# ---- house rules -------------------------------------------------------------------------------


def _yaml_files() -> list[Path]:
    return sorted(p for p in ANSIBLE_DIR.rglob("*.yml"))


def _tasks(node: Any) -> Iterator[dict[str, Any]]:
    """Every task in a playbook or task file, blocks and plays opened up."""
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        if "hosts" in node:  # a play
            for key in ("pre_tasks", "tasks", "post_tasks", "handlers"):
                yield from _tasks(node.get(key, []))
        elif "block" in node:
            for key in ("block", "rescue", "always"):
                yield from _tasks(node.get(key, []))
        else:
            yield node


def _module(task: dict[str, Any]) -> str:
    keywords = {
        "name", "when", "register", "changed_when", "failed_when", "check_mode", "vars", "loop",
        "loop_control", "notify", "listen", "become", "environment", "tags", "run_once", "args",
        "delegate_to", "ignore_errors", "no_log",
    }  # fmt: skip
    mods = [k for k in task if k not in keywords]
    assert len(mods) == 1, f"cannot tell the module of {task}"
    return mods[0].removeprefix("ansible.builtin.")


def _all_tasks() -> Iterator[tuple[Path, dict[str, Any]]]:
    for path in _yaml_files():
        if "/vars/" in str(path) or "/defaults/" in str(path):
            continue
        for task in _tasks(yaml.safe_load(path.read_text()) or []):
            yield path, task


def test_every_task_has_a_name() -> None:
    unnamed = [(str(p), t) for p, t in _all_tasks() if not t.get("name")]
    assert not unnamed


def test_no_task_that_writes_hides_its_change() -> None:
    """`changed_when: false` only on reads: raw/command/shell probes that also run in --check."""
    offenders = []
    for path, task in _all_tasks():
        if task.get("changed_when") is False:
            module = _module(task)
            if module not in READ_ONLY or task.get("check_mode") is not False:
                offenders.append(f"{path.relative_to(REPO)}: {task['name']}")
    assert not offenders


def test_never_drop_caches() -> None:
    """A warm page cache is what keeps a weight reload fast (seed 002, boot 4): no play may drop
    it. Comments may name it (to say never)."""
    for path in [*_yaml_files(), *ANSIBLE_DIR.rglob("*.j2"), ANSIBLE_DIR / "ansible.cfg"]:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            assert "drop_caches" not in code, f"{path}:{n}: {line}"


def _defaults() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in sorted(ANSIBLE_DIR.glob("roles/*/defaults/main.yml")):
        out.update(yaml.safe_load(path.read_text()) or {})
    return out


def test_variables_stay_out_of_clusters_namespace_and_are_documented() -> None:
    """`cluster inventory check` validates `cluster_*` keys and flags look-alikes of its host
    variables: the playbooks' variables must be neither. README.md documents every one."""
    readme = (ANSIBLE_DIR / "README.md").read_text()
    names = [k for k in _defaults() if not k.startswith("ansible_")]
    assert len(names) > 20
    for name in names:
        assert not name.startswith("cluster_"), name
        assert _suggest(name, HOST_VAR_NAMES) == "", name
        assert f"`{name}`" in readme, f"{name} is not documented in ansible/README.md"


def test_an_inventory_with_every_variable_is_accepted_by_cluster_and_ansible(
    tmp_path: Path,
) -> None:
    example = yaml.safe_load((REPO / "inventory" / "spark-8x.example.yaml").read_text())
    example["all"]["vars"].update(
        {
            k: v
            for k, v in _defaults().items()
            if not k.startswith("ansible_") and "{{" not in str(v)
        }
    )
    example["all"]["vars"]["cluster_known_hosts"] = str(tmp_path / "known_hosts")
    path = tmp_path / "sparks.yaml"
    path.write_text(yaml.safe_dump(example))
    assert len(load_inventory(path).nodes) == 8
    listing = json.loads(
        subprocess.run(
            [str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(path), "--list"],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout
    )
    assert listing["_meta"]["hostvars"]["spark-3"]["spark_docker_log_max_size"] == "1g"

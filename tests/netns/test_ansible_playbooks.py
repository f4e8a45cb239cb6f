"""Real `ansible-playbook` (ansible-core from PyPI) runs ansible/prepare.yml and ansible/check.yml
against the 8-node netns testbed (issue 10), using the testbed's own inventory.

Host keys: the playbooks point OpenSSH at the inventory's `cluster_known_hosts` (the testbed's
<root>/known_hosts), with Ansible's host key checking left ON; one run proves that a node whose
key is not listed is refused. A second inventory file beside the testbed's adds the host
variables a real inventory would carry for the network part (spark_manage_network, each node's
fabric address and fab host name); the testbed inventory itself is used as written.

What the testbed cannot prove (see ansible/README.md): real restarts (no systemd: the handlers
say so instead), netplan apply, the NVIDIA runtime (there is none: check.yml reports it), NFS.

One module-scoped run sequence (~1 min on the 2-core VM): check --check (before) -> prepare ->
prepare -> check (after); the tests below assert on it, then each fault test adds one short run.
Every per-node folder the plays touch is restored at the end.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from orchestrator.testbed import Testbed

pytestmark = [pytest.mark.ansible, pytest.mark.netns, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_DIR = REPO / "ansible"
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
# The per-node folders the plays write into (node path -> controller path via Node.view).
VIEWS = ("/etc/docker", "/etc/systemd", "/etc/netplan", "/root/.ssh")
NVIDIA_MISSING = (
    "NVIDIA container runtime missing: dockerd has no `nvidia` runtime and "
    "nvidia-container-runtime is not installed (install nvidia-container-toolkit)"
)
RECAP = re.compile(
    r"^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+"
    r"unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)\s+skipped=(?P<skipped>\d+)",
    re.M,
)


@dataclass
class Run:
    argv: list[str]
    rc: int
    out: str
    seconds: float
    recap: dict[str, dict[str, int]] = field(default_factory=dict)

    def section(self, task: str) -> str:
        """The output of one task (by the text in its TASK [...] / RUNNING HANDLER [...] header)."""
        parts = re.split(r"^(?=TASK \[|RUNNING HANDLER \[|PLAY RECAP)", self.out, flags=re.M)
        return "".join(p for p in parts if p.split("\n", 1)[0].find(task) >= 0)

    def messages(self, task: str) -> dict[str, object]:
        """host -> the `msg` a debug task printed for it."""
        found = {}
        for m in re.finditer(r"^ok: \[(\S+)\] => (\{.*?^\})", self.section(task), re.M | re.S):
            found[m.group(1)] = json.loads(m.group(2))["msg"]
        return found

    def explain(self) -> str:
        return f"$ {' '.join(self.argv)}\nrc={self.rc} ({self.seconds:.1f} s)\n{self.out[-6000:]}"


class Ansible:
    """ansible-playbook against the testbed, from the repository root, with ansible/ansible.cfg."""

    def __init__(self, tb: Testbed, workdir: Path) -> None:
        self.tb = tb
        self.extra_inventory = workdir / "spark-vars.yaml"
        # Host vars a real inventory would carry for the fabric (the testbed's own addresses).
        self.extra_inventory.write_text(
            yaml.safe_dump(
                {
                    "all": {
                        "vars": {"spark_manage_network": True},
                        "hosts": {
                            nd.name: {
                                "spark_fabric_address": f"{nd.fab_addr}/24",
                                "spark_ssh_extra_names": [f"{nd.name}-fab"],
                            }
                            for nd in tb.nodes
                        },
                    }
                }
            )
        )
        self.env = {
            **os.environ,
            "ANSIBLE_CONFIG": str(ANSIBLE_DIR / "ansible.cfg"),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_LOCAL_TEMP": str(workdir / "ansible-tmp"),
        }
        self.env.pop("ANSIBLE_FORCE_COLOR", None)
        self.env.pop("ANSIBLE_HOST_KEY_CHECKING", None)  # ansible.cfg: True. Never turned off.
        self.runs: list[Run] = []

    def __call__(self, playbook: str, *args: str, extra: dict | None = None) -> Run:
        if not ANSIBLE_PLAYBOOK.exists():
            pytest.fail(f"ansible-playbook not installed at {ANSIBLE_PLAYBOOK} (dev dependency)")
        extra_vars = {"spark_require_nvidia_runtime": False, **(extra or {})}
        argv = [
            str(ANSIBLE_PLAYBOOK),
            "-i",
            str(self.tb.inventory),
            "-i",
            str(self.extra_inventory),
            "-f",
            "8",
            "-e",
            json.dumps(extra_vars),
            str(ANSIBLE_DIR / playbook),
            *args,
        ]
        # Each run gets its own SSH ControlMaster sockets (closed after it): a master left from
        # an earlier run would outlive a stopped sshd and skip host key verification. The
        # folder is short: a ControlPath must fit in 108 bytes.
        cp_dir = Path(tempfile.mkdtemp(prefix="ctb-cp-", dir="/tmp"))
        t0 = time.monotonic()
        try:
            proc = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                env={**self.env, "ANSIBLE_SSH_CONTROL_PATH_DIR": str(cp_dir)},
                cwd=REPO,
                timeout=240,
                check=False,
            )
        finally:
            _close_masters(cp_dir)
        run = Run(argv, proc.returncode, proc.stdout + proc.stderr, time.monotonic() - t0)
        for m in RECAP.finditer(proc.stdout):
            run.recap[m.group("host")] = {
                k: int(v) for k, v in m.groupdict().items() if k != "host"
            }
        self.runs.append(run)
        print(f"ansible-playbook {playbook} {' '.join(args)}: rc={run.rc} {run.seconds:.1f} s")
        return run


def _close_masters(cp_dir: Path) -> None:
    """`ssh -O exit` every ControlMaster of one run, then remove its socket folder."""
    for sock in cp_dir.iterdir():
        subprocess.run(
            ["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "ctb-master"],
            capture_output=True,
            timeout=10,
            check=False,
        )
    shutil.rmtree(cp_dir, ignore_errors=True)


def _snapshot(tb: Testbed) -> dict[Path, tuple[bytes, int] | None]:
    """Every file (bytes, mode) and folder (None) under the per-node views the plays touch."""
    snap: dict[Path, tuple[bytes, int] | None] = {}
    for nd in tb.nodes:
        for view in VIEWS:
            root = nd.view(view)
            for p in sorted(root.rglob("*")):
                snap[p] = (p.read_bytes(), p.stat().st_mode & 0o7777) if p.is_file() else None
    return snap


def _restore(tb: Testbed, snap: dict[Path, tuple[bytes, int] | None]) -> None:
    """Put the views back as they were (the folders themselves are bind-mounted: never replaced)."""
    now = _snapshot(tb)
    for p in sorted(set(now) - set(snap), key=lambda q: len(q.parts), reverse=True):
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink(missing_ok=True)
    for p, entry in snap.items():
        if entry is None:
            p.mkdir(parents=True, exist_ok=True)
        elif now.get(p) != entry:
            p.write_bytes(entry[0])
            os.chmod(p, entry[1])


@dataclass
class Prepared:
    tb: Testbed
    ansible: Ansible
    before: dict[Path, tuple[bytes, int] | None]
    check_before: Run
    after_check_before: dict[Path, tuple[bytes, int] | None]
    first: Run
    second: Run
    after_second: dict[Path, tuple[bytes, int] | None]
    check_after: Run
    after_check_after: dict[Path, tuple[bytes, int] | None]
    dockerd_restarted: set[int] = field(default_factory=set)


@pytest.fixture(scope="module")
def prepared(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prepared]:
    tb = testbed
    ansible = Ansible(tb, tmp_path_factory.mktemp("ansible"))
    before = _snapshot(tb)
    prep: Prepared | None = None
    try:
        check_before = ansible("check.yml", "--check")
        after_check_before = _snapshot(tb)
        first = ansible("prepare.yml")
        second = ansible("prepare.yml")
        after_second = _snapshot(tb)
        check_after = ansible("check.yml")
        after_check_after = _snapshot(tb)
        prep = Prepared(
            tb,
            ansible,
            before,
            check_before,
            after_check_before,
            first,
            second,
            after_second,
            check_after,
            after_check_after,
        )
        yield prep
    finally:
        _restore(tb, before)
        # dockerd reads daemon.json only at start: a node restarted with the play's file goes
        # back to the testbed's own configuration too.
        for k in sorted(prep.dockerd_restarted if prep else ()):
            tb.restart_daemon(k, "dockerd")
        total = sum(r.seconds for r in ansible.runs)
        print(f"ansible runs: {len(ansible.runs)}, {total:.1f} s in ansible-playbook")


def _node_names(tb: Testbed) -> set[str]:
    return {nd.name for nd in tb.nodes}


# ---- prepare.yml -----------------------------------------------------------------------------


def test_prepare_changes_every_node_then_converges_to_changed_0(prepared: Prepared) -> None:
    tb, first, second = prepared.tb, prepared.first, prepared.second
    assert first.rc == 0, first.explain()
    assert set(first.recap) == _node_names(tb), first.explain()
    for host, r in first.recap.items():
        assert r["changed"] > 0 and r["failed"] == 0 and r["unreachable"] == 0, (host, r)
    assert second.rc == 0, second.explain()
    assert set(second.recap) == _node_names(tb)
    for host, r in second.recap.items():
        assert r["changed"] == 0, f"second run changed {host}: {r}\n{second.explain()}"
        assert r["failed"] == 0 and r["unreachable"] == 0, (host, r)


def test_handlers_are_honest_without_systemd(prepared: Prepared) -> None:
    """No systemd on the testbed: every skipped restart is named, and no handler reports a
    change (a restart that did not happen)."""
    first = prepared.first
    names = _node_names(prepared.tb)
    for handler, text in (
        ("Docker NOT restarted (no systemd", "docker NOT restarted on {}: systemd is not running"),
        (
            "systemd-logind NOT reloaded",
            "systemd-logind NOT reloaded on {}: systemd is not running",
        ),
        ("netplan NOT applied", "netplan NOT applied on {}: systemd is not running here"),
    ):
        msgs = prepared.first.messages(handler)
        assert set(msgs) == names, f"{handler}: {sorted(msgs)}\n{first.explain()}"
        for host, msg in msgs.items():
            assert text.format(host) in str(msg)
    handlers = "".join(
        p
        for p in re.split(r"^(?=TASK \[|RUNNING HANDLER \[|PLAY RECAP)", first.out, flags=re.M)
        if p.startswith("RUNNING HANDLER")
    )
    assert handlers, "no handler ran"
    assert "changed: [" not in handlers, handlers


def test_prepare_writes_what_it_promises_on_every_node(prepared: Prepared) -> None:
    tb = prepared.tb
    host_keys = {}
    for line in tb.known_hosts.read_text().splitlines():
        name, typ, key = line.split()[:3]
        host_keys[name] = f"{typ} {key}"
    pubkeys = {}
    for nd in tb.nodes:
        daemon = json.loads(nd.view("/etc/docker/daemon.json").read_text())
        assert daemon == {
            "log-driver": "json-file",
            "log-opts": {"max-size": "1g", "max-file": "5"},
        }

        dropin = nd.view("/etc/systemd/logind.conf.d/90-cluster-removeipc.conf")
        assert "[Login]\nRemoveIPC=no\n" in dropin.read_text()

        netplan = nd.view("/etc/netplan/60-cluster-fabric.yaml")
        assert netplan.stat().st_mode & 0o777 == 0o600
        assert yaml.safe_load(netplan.read_text())["network"] == {
            "version": 2,
            "ethernets": {
                nd.fab_iface: {
                    "mtu": 9000,
                    "dhcp4": False,
                    "dhcp6": False,
                    "addresses": [f"{nd.fab_addr}/24"],
                }
            },
        }, "the netplan file configures the fabric port only, never the management port"

        key = nd.view("/root/.ssh/id_ed25519_cluster")
        assert key.stat().st_mode & 0o777 == 0o600
        pub = nd.view("/root/.ssh/id_ed25519_cluster.pub").read_text().split()
        assert pub[0] == "ssh-ed25519" and pub[2] == f"cluster:{nd.name}"
        pubkeys[nd.name] = " ".join(pub[:2])

        want_kh = [
            f"{o.name},{o.mgmt_addr},{o.fab_addr},{o.name}-fab {host_keys[o.mgmt_addr]}"
            for o in tb.nodes
        ]
        kh = nd.view("/root/.ssh/known_hosts_cluster").read_text().splitlines()
        assert [x for x in kh if not x.startswith("#")] == want_kh

        cfg = nd.view("/root/.ssh/config").read_text()
        assert cfg.startswith("# BEGIN cluster nodes (ansible/prepare.yml, role ssh_mesh)\nHost ")
        assert "IdentityFile ~/.ssh/id_ed25519_cluster" in cfg
        assert "UserKnownHostsFile ~/.ssh/known_hosts_cluster" in cfg
        assert "StrictHostKeyChecking yes" in cfg
    assert len(set(pubkeys.values())) == len(tb.nodes), "every node has its own key"
    controller_pub = tb.client_key.with_suffix(".pub").read_text().strip()
    for nd in tb.nodes:
        ak = nd.view("/root/.ssh/authorized_keys").read_text()
        assert controller_pub in ak, "the keys that were there stay"
        block = ak.split("# BEGIN cluster node keys (ansible/prepare.yml, role ssh_mesh)\n")[1]
        block = block.split("# END cluster node keys")[0].splitlines()
        assert block == [f"{pubkeys[o.name]} cluster:{o.name}" for o in tb.nodes]


def test_nodes_ssh_to_each_other_with_their_own_keys(prepared: Prepared) -> None:
    tb = prepared.tb
    for src, dst in ((3, 4), (7, 0)):
        peer = tb.node(dst)
        # Only the node's own cluster key, only the generated known_hosts, by the fab name.
        strict = (
            "ssh -F /dev/null -i ~/.ssh/id_ed25519_cluster -o IdentitiesOnly=yes"
            " -o UserKnownHostsFile=~/.ssh/known_hosts_cluster -o GlobalKnownHostsFile=/dev/null"
            f" -o StrictHostKeyChecking=yes -o BatchMode=yes {peer.name}-fab hostname"
        )
        assert tb.ssh(src, strict).stdout.strip() == peer.name
        # What the image chain does: plain ssh, the config block picks key and known_hosts.
        plain = tb.ssh(src, f"ssh -v {peer.mgmt_addr} hostname")
        assert plain.stdout.strip() == peer.name
        assert "id_ed25519_cluster" in plain.stderr and "Authenticated to" in plain.stderr


def test_dockerd_accepts_the_written_daemon_json(prepared: Prepared, testbed_image: str) -> None:
    """The testbed's dockerd 20.10 reads the node's /etc/docker/daemon.json at start: restart it
    (what a Spark's systemd would do) and the container log settings are the play's."""
    tb = prepared.tb
    prepared.dockerd_restarted.add(3)
    tb.restart_daemon(3, "dockerd")
    assert tb.docker(3, "info", "--format", "{{.LoggingDriver}}").stdout.strip() == "json-file"
    name = "ansible-logcfg-probe"
    tb.docker(3, "rm", "-f", name, check=False)
    try:
        tb.docker(3, "create", "--name", name, testbed_image, "true")
        cfg = tb.docker(3, "inspect", "--format", "{{json .HostConfig.LogConfig}}", name).stdout
        assert json.loads(cfg) == {
            "Type": "json-file",
            "Config": {"max-file": "5", "max-size": "1g"},
        }
    finally:
        tb.docker(3, "rm", "-f", name, check=False)


# ---- check.yml -------------------------------------------------------------------------------


def test_check_reports_what_is_missing_per_node_and_changes_nothing(prepared: Prepared) -> None:
    p = prepared
    names = _node_names(p.tb)
    for run, snap_before, snap_after in (
        (p.check_before, p.before, p.after_check_before),
        (p.check_after, p.after_second, p.after_check_after),
    ):
        assert run.rc == 2, run.explain()  # findings fail the node (spark_check_fail)
        assert set(run.recap) == names
        for host, r in run.recap.items():
            assert r["changed"] == 0 and r["unreachable"] == 0 and r["failed"] == 1, (host, r)
        assert snap_after == snap_before, "check.yml changed a file"
    before = p.check_before.messages("Report")
    after = p.check_after.messages("Report")
    assert set(before) == set(after) == names
    for host in names:
        found = before[host]
        assert isinstance(found, list) and found[0] == f"MISSING on {host}:", found
        text = "\n".join(found[1:])
        assert NVIDIA_MISSING in found
        assert "/etc/docker/daemon.json differs from the wanted settings in: log-driver" in text
        assert "logind RemoveIPC=no (effective value: yes, the default" in text
        assert "node SSH key ~/.ssh/id_ed25519_cluster missing" in text
        # After prepare, only what the testbed cannot have is left.
        assert after[host] == [f"MISSING on {host}:", NVIDIA_MISSING], after[host]
    # the check run after prepare ran the real node -> node hop of the image chain
    hops = p.check_after.section("SSH to the next node in the chain")
    assert hops.count("ok: [") == len(names), hops


# ---- faults and guards -----------------------------------------------------------------------


def test_one_node_unreachable_is_ansibles_failure_and_the_others_complete(
    prepared: Prepared, clean_testbed: Testbed
) -> None:
    tb = clean_testbed
    down = tb.node(0)  # the first host: run_once tasks must move on to the next one
    tb.stop_daemon(down, "sshd")
    run = prepared.ansible("prepare.yml")
    assert run.rc == 4, run.explain()  # ansible-playbook: 4 = some hosts were unreachable
    assert run.recap[down.name]["unreachable"] == 1, run.explain()
    assert re.search(
        rf"^fatal: \[{down.name}\]: UNREACHABLE! .*Connection refused", run.out, re.M
    ), run.explain()
    others = _node_names(tb) - {down.name}
    for host in others:
        r = run.recap[host]
        assert r["failed"] == 0 and r["unreachable"] == 0, (host, r, run.explain())
        assert r["ok"] > 0
        # converged: nothing to do, and the down node's key stays authorized (no flapping)
        assert r["changed"] == 0, (host, r, run.explain())
    block = tb.node(1).view("/root/.ssh/authorized_keys").read_text()
    assert f"cluster:{down.name}" in block


def test_prepare_fails_clearly_without_the_nvidia_runtime_by_default(prepared: Prepared) -> None:
    run = prepared.ansible(
        "prepare.yml", "--tags", "nvidia", extra={"spark_require_nvidia_runtime": True}
    )
    assert run.rc == 2, run.explain()
    for nd in prepared.tb.nodes:
        assert run.recap[nd.name]["failed"] == 1 and run.recap[nd.name]["changed"] == 0
        assert re.search(
            rf"^fatal: \[{nd.name}\]: FAILED! .*{nd.name}: NVIDIA container runtime missing",
            run.out,
            re.M,
        ), run.explain()


def test_network_guard_never_touches_the_interface_ansible_runs_over(prepared: Prepared) -> None:
    """Asked to put the management port (the one carrying ansible_host) in the netplan file, the
    play refuses, even when mgmt_iface does not name it: $SSH_CONNECTION gives it away."""
    nd = prepared.tb.node(2)
    netplan = nd.view("/etc/netplan/60-cluster-fabric.yaml")
    before = netplan.read_bytes()
    run = prepared.ansible(
        "prepare.yml",
        "--tags",
        "network",
        "--limit",
        nd.name,
        extra={
            "spark_netplan_fabric": {nd.mgmt_iface: f"{nd.mgmt_addr}/24"},
            "mgmt_iface": "not-the-mgmt-port",
        },
    )
    assert run.rc == 2 and run.recap[nd.name]["failed"] == 1, run.explain()
    assert (
        f"refusing to write /etc/netplan/60-cluster-fabric.yaml on {nd.name}: it would configure"
        f" {nd.mgmt_iface}, which carries the connection Ansible runs over" in run.out
    ), run.explain()
    assert netplan.read_bytes() == before


def test_host_key_checking_stays_on(prepared: Prepared) -> None:
    """A known_hosts without the node's key: Ansible refuses the node (never trust on first use)."""
    run = prepared.ansible(
        "check.yml",
        "--limit",
        "ctb-node1",
        extra={"ansible_ssh_common_args": "-o UserKnownHostsFile=/dev/null"},
    )
    assert run.recap["ctb-node1"]["unreachable"] == 1, run.explain()
    assert "Host key verification failed" in run.out, run.explain()

"""Words the reports share: rank ranges, launch waves, plurals, the preflight progress line."""

from __future__ import annotations

from orchestrator.wording import plural, ranks_text, waves_text


def test_launch_waves_read_as_words_not_a_python_list():
    assert waves_text([tuple(range(8))]) == "one wave: ranks 0-7"
    assert waves_text([(0,), tuple(range(1, 8))]) == "2 waves: rank 0, then ranks 1-7"
    assert ranks_text([5]) == "rank 5"


def test_plurals_of_words_ending_in_s_take_es():
    assert plural(8, "process") == "8 processes"
    assert plural(1, "process") == "1 process"
    assert plural(2, "container") == "2 containers"


def test_preflight_says_which_nodes_answered_and_which_are_awaited():
    from orchestrator.inventory import load_inventory
    from orchestrator.paths import builtin_simulated_inventory
    from orchestrator.probes.node_facts import NodeFacts
    from orchestrator.run.boot import preflight_progress

    heard: list[str] = []

    class UI:
        def progress(self, text: str) -> None:
            heard.append(text)

    inventory = load_inventory(builtin_simulated_inventory())
    on_node = preflight_progress(inventory, UI())  # type: ignore[arg-type]
    for k in (3, 0, 1, 2, 4, 5, 6):
        on_node(NodeFacts(node=f"sim-node{k}", rank=k, address=f"127.0.0.{10 + k}", reachable=True))
    assert heard[0] == (
        "preflight: 1/8 nodes answered; waiting for "
        "sim-node0, sim-node1, sim-node2, sim-node4, sim-node5, sim-node6, sim-node7"
    )
    assert heard[-1] == "preflight: 7/8 nodes answered; waiting for sim-node7"
    on_node(NodeFacts(node="sim-node7", rank=7, address="127.0.0.17", reachable=True))
    assert heard[-1] == "preflight: 8/8 nodes answered; checking the rest"

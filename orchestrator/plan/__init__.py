"""The plan: pure decisions made before anything starts.

rendezvous (the head's fabric address, per-rank NCCL/Gloo env from each node's facts), launch
(per-rank argv, names, labels, waves). Nothing here touches a node."""

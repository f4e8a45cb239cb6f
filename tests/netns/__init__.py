"""The netns tier: a real cluster of sshd + dockerd "nodes" in network namespaces (root only)."""

"""The boot supervisor: followers (I/O to events), progress, state (reducer), watchers."""

"""How a rank runs: Docker containers (Sparks, the testbed) or detached processes (simulated)."""

"""``bench/hostile_device.py``: an honest fleet against one hostile device credential and one
unauthenticated client (issue 28)."""

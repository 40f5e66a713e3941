"""The fleet storm benchmark (``bench/fleet_storm.py``): the simulated fleet, its probes, the command line."""

"""The MQTT ingest benchmark (``bench/mqtt_ingest.py``): its counting subscriber, raw-socket publisher,
stream encoding, timed phases, profile reading and report."""

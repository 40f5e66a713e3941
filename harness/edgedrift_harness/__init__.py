"""The EdgeDrift process harness: ports, brokers, the cloud process, MQTT watchers, PostgreSQL, faults."""

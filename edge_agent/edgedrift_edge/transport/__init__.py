"""MQTT through paho-mqtt 2.x: broker URLs, the clients, and the agent's transport."""

"""The cloud trainer's client, and the cloud's training in this process for embedding."""

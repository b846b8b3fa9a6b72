"""The node's durable store: manifest and store head."""

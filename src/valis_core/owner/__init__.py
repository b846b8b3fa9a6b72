"""The owner terminus: the node's authenticated write path (DNS UPDATE over TSIG)."""

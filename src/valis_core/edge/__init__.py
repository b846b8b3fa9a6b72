"""The public TLS edge: DNS over HTTPS (RFC 8484) for the served zones."""

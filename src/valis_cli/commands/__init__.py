"""One module per `valis` command."""

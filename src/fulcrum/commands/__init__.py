"""One module per `fulcrum` command."""

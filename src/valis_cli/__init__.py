"""The thin ``valis`` entry point: argv to a library call to an exit code."""

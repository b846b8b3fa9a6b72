"""fulcrum: the privileged launcher that prepares a unit's netns and hands :53 down."""

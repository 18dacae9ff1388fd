"""index subpackage."""

"""segment subpackage."""

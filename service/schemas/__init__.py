"""Request and response schemas, split by direction."""

"""Configuration: option declarations and types, the run's decided configuration."""

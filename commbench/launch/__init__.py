"""Launchers: how ranks get started. ``local`` spawns them on this machine (the default)."""

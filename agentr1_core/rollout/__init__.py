"""Rollout: engine interface, engines, and the driver that runs episodes concurrently."""

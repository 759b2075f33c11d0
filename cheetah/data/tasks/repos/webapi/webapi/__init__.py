"""Routing and JSON handlers for a bookmarks service."""

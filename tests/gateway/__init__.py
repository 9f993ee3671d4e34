"""Tests for the gateway package."""

"""Tests of agent/sources."""

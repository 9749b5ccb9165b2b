"""Tests of agent/gpu."""

"""Tests of agent/collectors."""

"""Tests of agent/diag."""

"""Tests of agent/delivery."""

"""Tests of collector/query."""

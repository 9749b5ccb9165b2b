"""Tests of collector/detector."""

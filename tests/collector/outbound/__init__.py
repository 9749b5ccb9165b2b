"""Tests of collector/outbound."""

"""Tests of collector/alerts."""

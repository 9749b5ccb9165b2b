"""Tests of core/detector."""

"""Numbers with units: link rates and durations, counters turned into rates (resets and
saturation)."""

"""Druid's coordinator duties that Sluice runs on the overlord: retention rules applied to used segments."""

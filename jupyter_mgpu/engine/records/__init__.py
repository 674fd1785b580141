"""What a rank records for the notebook and the sidebar: telemetry samples, collective and DTensor traces, imports,
training steps, memory figures and ``mg.profile``'s rank half."""

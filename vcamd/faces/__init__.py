"""Finding faces in frames: detection (SCRFD), tracking between detections, alignment to crops."""

"""Capture: where live frames come from (`sources`), the thread that reads them into the newest-frame
slot (`reader`), and what decoding a camera's JPEG costs (`jpeg`)."""

"""What each face in a frame gets while swapping is on — swapped, held, obscured, or (the user's
explicit opt-out) shown — decided in one place for the camera and for `vcamd swap`.

`rule.compose` is the rule: the live loop (`vcamd.live.frames`) hands it what tracking knows of the
frame; `FaceEngine.process_frame` (`vcamd swap`, a photo or a video's frame) hands it the faces it
detected and the swaps it made. `obscure` is how a face is made unrecognisable, `geometry` when two
positions are one face. Below both `live/` and `faces/`: it imports neither, and knows no model,
thread or clock, so its property tests (tests/privacy/test_rule_property.py) hold for both callers.
"""

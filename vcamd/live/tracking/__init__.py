"""Tracking: where the faces are in each frame and which were lost — the tracker (`tracker`), its
bookkeeping (`trackedfaces`), the full detections (`full`), the detector sizes (`sizes`), the cheap
ways to follow a face (`motion`, `cropplan`, `changes`), steady positions (`smoothing`), and the
cover for what changed where no detection has looked yet (`unseen`)."""

"""Finding faces and changing them: detection (SCRFD), alignment to crops, the model specs, identity
(ArcFace embeddings), the swapper, the enhancer, paste-back (blend) and `FaceEngine`, the per-frame path."""

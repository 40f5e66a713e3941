"""Moving a device from one gateway to another without loss and warm (issue 30 row 4): what a move
holds on each side (:mod:`~edgedrift_edge.handover.moves`, which says why and in which order) and the
gateway's steps in it (:mod:`~edgedrift_edge.handover.steps`)."""

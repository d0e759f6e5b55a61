"""Stage 1, lowering and layout: a schedule on an integer chunk grid (`grid`, paper App. E.2), the channel
each shard travels on (`channels`) and where every chunk unit lives on every rank (`layout`)."""

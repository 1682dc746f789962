"""The scheduler's core: what it knows (cache), what waits (queue), where a pod fits
(placement), a pod's cycle (cycle), the loop that runs cycles (scheduler) and the watch
events that feed them (eventhandlers)."""

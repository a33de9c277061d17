"""The RL agent: a Gymnasium environment over the placement state, a per-device policy trained
with MaskablePPO against the cost model, and the code that trains and loads it."""

"""What the fronts of every client era share: the answer writer and the Host and Origin guard."""

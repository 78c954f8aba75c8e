"""The Markov chain as statistics: the state and its initialisation, the
tree moves and their Metropolis-Hastings ratios, the sweep over the trees and
the other conditional draws (sigma, probit and logit latents, DART)."""

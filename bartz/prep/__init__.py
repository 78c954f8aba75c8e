"""Host-side preparation of a fit, in numpy: argument checks, column
encoding (categories, missing values), cut-points and binning, R's priors
and the size ladder that keeps compiled shapes few."""

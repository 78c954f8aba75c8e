"""The R-style user layer: `gbart`, its result object, save and load, the
estimators and partial dependence. It converts and validates the arguments
(`bartz.prep`), runs the chain (`bartz.run`) and packages the draws; it does
no math itself."""

"""Interactive Kubeflow Trainer v2 TrainJobs from notebooks."""

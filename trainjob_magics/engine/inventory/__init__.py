"""What this user's TrainJobs are and hold, across namespaces, kept current by one watch per
namespace (the Jupyter server extension's source)."""

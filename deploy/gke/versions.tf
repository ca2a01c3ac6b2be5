terraform {
  required_version = ">= 1.5"
  required_providers {
    google = {
      source  = "hashicorp/google"
      version = ">= 6.36, < 7.0" # node_config.flex_start, max_run_duration
    }
  }
}

provider "google" {
  project = var.project
  region  = var.region
}

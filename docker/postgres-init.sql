-- One database per service (docker/compose.yaml, profile "postgres").
CREATE DATABASE rdv_directory;
CREATE DATABASE rdv_bridge;
CREATE DATABASE rdv_gateway;

//! Hugging Face safetensors folders: config.json plus one or several *.safetensors files.

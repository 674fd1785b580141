import './base.css';
import './ranks.css';
